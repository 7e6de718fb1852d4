"""The release review page (`ort-bundler report`): what a bundle is, holds, loads and proves, as one
self-contained HTML file a reviewer opens offline.

`view` turns the bundle's own records (read by the command, never trusted: any field may be missing, of the
wrong type or hold markup) into typed view records; `closure` lays out the DLL closure as SVG geometry; `page`
renders both through one Jinja template with autoescaping on, so no text from a bundle reaches the page
unescaped. The page carries no script and a Content-Security-Policy that allows none.
"""
