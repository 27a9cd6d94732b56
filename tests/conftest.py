"""Suite-wide collection order: tests marked `heavy` (tens of seconds each on a
2-core CI machine) run first.  pytest-xdist's worksteal scheduler then spreads
them over both workers at the start and ends the run on short tests, instead
of leaving one worker alone on a long test at the end."""


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)     # stable: file order otherwise
