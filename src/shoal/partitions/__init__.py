"""The one seam request handlers call for any partition, whatever its kind (see manager.py)."""
