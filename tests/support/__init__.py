"""Helpers the tests share, one module per topic; test modules import from here, never from each other."""
