"""What `rasp eval` does when not told, for the command line and the
evaluators (trainer/fan/evaluate.py, trainer/benchmark/evaluate.py) alike."""

SEED = 1234            # --seed: the test inputs' generator (`rasp data --seed S` writes a split's with S)
SAMPLES = 256          # --samples: Fan-task test inputs per length
BATCH = 128            # --batch-size: inputs run together (also `rasp run`'s, on a trained model)
