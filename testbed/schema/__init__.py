"""What the testbed writes, as typed models: results.json (results.py). Below the experiment runner that
writes it and the labs that read it."""
