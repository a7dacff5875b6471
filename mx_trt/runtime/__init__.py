"""Run time: the fused MXNet operator that runs an engine inside an executor (:mod:`.fused_op`)."""
