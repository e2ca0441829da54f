"""Serving strategies over HTTP and viewing traces in a browser."""
