"""Ray Serve applications the RayService tests deploy on the real Ray head."""
