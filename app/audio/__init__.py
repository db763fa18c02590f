"""What you hear and what hears you: the audio devices and their choice (the Audio box), the
PortAudio streams and their rings, switching devices mid-conversation, echo cancellation, the
speaker's queue, what was played (for the recording), and a file fed as the microphone."""
