"""pytest collects the markdown guides' doctests here; the Sphinx configuration and the built site are no tests."""

collect_ignore = ["conf.py"]
collect_ignore_glob = ["_build/*"]
