"""The parity suite: backends compared with the MuJoCo reference (see ``simbackend.parity``)."""
