"""Tools built on top of the session, outside the runtime's families: training a DiffuPlex
predictor from conversations run through a DuplexSession (`diffuplex`)."""
