"""Using a trained model: `rasp run RUN`, `rasp.load(RUN)` and `rasp export`."""
