"""The model you talk with: the model list (built in, the Hub, cached, folders), downloads and
their advice, choosing and loading a model off the GUI thread, and its memory check."""
