"""The command line: subcommands (main.py) and solo-learn's own launchers (run_solo.py)."""
