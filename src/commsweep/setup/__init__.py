"""What one sweep point is: its model, parallel layout, AICB arguments, memory, and the config file it comes from."""
