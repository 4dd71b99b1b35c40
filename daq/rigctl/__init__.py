"""rigctl: the command-line tool that drives the rig service (status, runs, export, install)."""
