"""The comparison benchmarks' run kind (flip-flop, word problems, ListOps, memory, counting, logic): a task's splits, a reference or looped encoder, its presets, scoring and `rasp eval` per split."""
