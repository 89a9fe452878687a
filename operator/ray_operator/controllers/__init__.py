"""One controller per kind: small named reconcile steps over the pure builders and planners."""
