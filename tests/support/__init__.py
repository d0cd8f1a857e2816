"""Test doubles and harnesses shared by the gateway tests (importable as ``support``)."""
