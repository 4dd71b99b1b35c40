"""`rigctl`: the command-line tool that installs, drives and inspects the rig."""
