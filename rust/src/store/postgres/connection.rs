//! The runtime every connection of a backend runs on, connecting (TLS
//! through rustls, by the URL's `sslmode`), and the link to the server one
//! caller uses at a time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::classify;
use crate::error::{Error, Result};
use crate::store::Location;

/// Where the server is and how to reach it.
pub struct Server {
    config: Config,
    tls: MakeRustlsConnect,
    runtime: Runtime,
    pub at: Location,
}

/// One connection; its protocol task runs on the backend's runtime.
pub struct Link {
    pub client: Client,
    protocol: JoinHandle<()>,
}

/// How long a closing link waits for the server to take its goodbye.
const GOODBYE: Duration = Duration::from_secs(1);

impl Server {
    pub fn new(url: &str, at: &Location) -> Result<Self> {
        let config: Config = url.parse().map_err(|e| {
            Error::Config(format!(
                "{at}: not a PostgreSQL URL ({e}); write postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            ))
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::io(at, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots =
            rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("{at}: TLS setup failed: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Server {
            config,
            tls: MakeRustlsConnect::new(tls),
            runtime,
            at: at.clone(),
        })
    }

    /// Runs `future` to completion on the backend's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    pub fn connect(&self) -> Result<Link> {
        let (client, connection) = self
            .block_on(self.config.connect(self.tls.clone()))
            .map_err(|e| classify(&self.at, e))?;
        let protocol = self.runtime.spawn(async move {
            // Ends when the client is dropped or the server goes away; the
            // next use of the link then fails and it is replaced.
            let _ = connection.await;
        });
        Ok(Link { client, protocol })
    }

    /// Ends `link` now: its goodbye sent, its socket closed. Dropping the
    /// client alone is not enough: a current-thread runtime runs the
    /// protocol task only while a caller blocks on it, so a closed store
    /// would hold its server connections until it is garbage.
    pub fn disconnect(&self, link: Link) {
        let Link {
            client,
            mut protocol,
        } = link;
        drop(client);
        // The timer is made inside the runtime, whose clock it needs.
        let ended = self.block_on(async { tokio::time::timeout(GOODBYE, &mut protocol).await });
        if ended.is_err() {
            protocol.abort();
            let _ = self.block_on(protocol);
        }
    }
}
