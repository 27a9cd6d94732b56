"""Benchmarks (run as scripts); a package so tests import bench.naive_rasp without
putting bench/ on sys.path, where bench/compiler.py would shadow the compiler package."""
