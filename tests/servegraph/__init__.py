"""Tests of the RayServeGraph pieces: fetch, graph builder on a real Ray head, event endpoint."""
