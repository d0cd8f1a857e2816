"""Tests of hermes.gateway (a package, so its conftest and modules do not clash by name)."""
