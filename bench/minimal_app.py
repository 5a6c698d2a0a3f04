"""The reference for start-up: the smallest Textual app with a footer, rendering one line."""

from textual.app import App, ComposeResult
from textual.widgets import Footer, Static


class Minimal(App):
    def compose(self) -> ComposeResult:
        yield Static("minimal-first-frame")
        yield Footer()


if __name__ == "__main__":
    Minimal().run()
