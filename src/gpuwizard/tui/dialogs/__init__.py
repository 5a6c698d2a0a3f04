"""Modal questions: text, confirmations, pickers, trust and the environment picker."""
