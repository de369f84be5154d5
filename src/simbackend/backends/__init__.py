"""Engine backends. Each subpackage is the only code that imports its engine to simulate."""
