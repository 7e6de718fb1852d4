"""Jinja2 templates for the scripts in a bundle: package data read by bundler.render."""
