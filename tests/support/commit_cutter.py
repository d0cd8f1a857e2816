"""A TCP relay on loopback in front of the test server that loses a ``COMMIT``'s answer.

Every connection through it is relayed byte for byte, until it is armed: the next ``COMMIT``
of a store's write transaction (not its search indexer's, whose commits are relayed) is then
either passed on to the server (which commits) or held back (so the transaction is rolled back
when the connection goes), and the connection is cut before any answer comes back. The
client is left not knowing whether its transaction committed, as when a server or a network
goes away at that moment.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit

# The simple-protocol Query message a client sends to commit: its text ends the message.
_COMMIT = b"COMMIT\x00"
# What a store's write transaction (not its search indexer's) takes in its first statement.
_WRITE_BEGINS = b"nextval('hermes_commits')"


class CommitCutter:
    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        assert parts.hostname is not None and parts.port is not None
        self._server = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        user = f"{parts.username}@" if parts.username else ""
        #: ``server_url`` through the relay.
        self.url = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))
        self._armed: bool | None = None  # None: relay; True/False: cut, passing COMMIT on or not
        self._lock = threading.Lock()
        #: Set once a connection has been cut.
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, *, pass_commit_on: bool) -> None:
        with self._lock:
            self._armed = pass_commit_on

    def close(self) -> None:
        self._listener.close()

    def _take_arming(self) -> bool | None:
        with self._lock:
            armed, self._armed = self._armed, None
            return armed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(self._server)
            answers_lost = threading.Event()
            threading.Thread(target=self._up, args=(client, server, answers_lost),
                             daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, answers_lost),
                             daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket,
            answers_lost: threading.Event) -> None:
        writing = False  # in a store's write transaction: the COMMIT to lose is its
        try:
            while data := client.recv(65536):
                writing = writing or _WRITE_BEGINS in data
                if _COMMIT in data and writing:
                    writing = False
                    armed = self._take_arming()
                    if armed is not None:
                        answers_lost.set()  # before the COMMIT leaves: no answer gets back
                        if armed:
                            server.sendall(data)
                            time.sleep(0.2)  # the server commits meanwhile
                        self._cut(client, server)
                        return
                server.sendall(data)
        except OSError:
            pass
        self._cut(client, server, quietly=True)

    def _down(self, server: socket.socket, client: socket.socket,
              answers_lost: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if answers_lost.is_set():
                    return
                client.sendall(data)
        except OSError:
            pass

    def _cut(self, client: socket.socket, server: socket.socket, *, quietly: bool = False) -> None:
        # Set before the client can see the cut: once it has, it may settle the commit and
        # return before this thread runs again.
        if not quietly:
            self.cut.set()
        for end in (client, server):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
