"""The DuplexCadence runtime, for every model family: the stage runner (clock ticks, CUDA graph
capture and replay, the capture policy: `stages`), the graphs it keeps (`graphs`) and frame
timing (`timing`). Where state lives is `engine.state`; how a family's frame runs is
`engine.families`.

Nothing here needs CUDA to import.
"""
