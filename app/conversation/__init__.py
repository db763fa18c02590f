"""A conversation: the engine thread (one session step per 80 ms period), starting and
stopping it from the window, the view of what was said, the transcript, the recording and
the Recordings list, and the prompts' progress."""
