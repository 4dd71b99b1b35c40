"""`rigctl`: the command-line client of the rig service."""
