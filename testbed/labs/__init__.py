"""Teaching labs: guides in experiments/labs/, their checkers here (`hpnlab lab list|start|check`)."""
