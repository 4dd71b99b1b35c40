<<<<<<< HEAD
"""`rigctl`: the command-line tool that installs, drives and inspects the rig."""
=======
"""rigctl: the command-line tool that drives the rig service (status, runs, export, install)."""
>>>>>>> recorder
