"""`rasp compare`: comparison suites as data (suites/*.toml), the run grid,
its runner (local processes or submitit/Slurm), and the report beside the
published numbers.  Modules: schema (what a suite holds), suite
(load/validate), grid (expansion), runner (skip/resume/execute), results
(read run dirs), ranking, report, plots, estimate, cli."""
