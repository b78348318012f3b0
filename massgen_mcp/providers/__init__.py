"""Model providers behind one seam (litellm today; the embedded model later)."""
