"""Reliability and security trials (issue 7): crashes, signals, contention, faults, hostile input.

A package so that its ``conftest`` and helper modules do not clash by name with other test
directories, and so that gateway processes started by these tests can import
``reliability.rounds_agent`` as their agent factory.
"""
