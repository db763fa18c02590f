"""The DuplexCadence runtime, for every model family: the stage runner (clock ticks, CUDA graph
capture and replay, the capture policy: `stages`), the graphs it keeps (`graphs`), frame
timing (`timing`) and the frame's wait for the device (`waiting`). Where state lives is
`engine.state`; how a family's frame runs is `engine.families`.

Nothing here needs CUDA to import.
"""
