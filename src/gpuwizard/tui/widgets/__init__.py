"""Widgets that know no screen: form fields and steps, the key bar, plots and the log view."""
