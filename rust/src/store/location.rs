//! Where a store keeps its data, as the user named it: a file path, or a
//! server URL. The backend is chosen from it ([`super::open`]).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a store's data lives, printable in messages: a URL's password
/// never appears in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (`state.db`).
    File(PathBuf),
    /// A database server, by its URL with the password left out.
    Server(String),
}

/// What a location names, before any backend looks at it.
#[derive(Debug, PartialEq, Eq)]
pub enum Target<'a> {
    File(&'a Path),
    /// `postgresql://` (or `postgres://`): the whole URL, password included.
    Postgres(&'a str),
    /// Some other `scheme://...`, which no backend serves.
    UnknownScheme(&'a str),
}

impl<'a> Target<'a> {
    /// Reads `location`: a URL if it starts with `scheme://`, a path otherwise.
    pub fn of(location: &'a OsStr) -> Self {
        let Some(text) = location.to_str() else {
            return Target::File(Path::new(location));
        };
        match text.split_once("://") {
            Some((scheme, _)) if is_scheme(scheme) => {
                if scheme.eq_ignore_ascii_case("postgresql")
                    || scheme.eq_ignore_ascii_case("postgres")
                {
                    Target::Postgres(text)
                } else {
                    Target::UnknownScheme(text)
                }
            }
            _ => Target::File(Path::new(location)),
        }
    }
}

/// A URL scheme as RFC 3986 spells one: a letter, then letters, digits, `+-.`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

impl Location {
    /// A server location for `url`, without the password of its user info.
    pub fn server(url: &str) -> Self {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Location::Server(url.to_owned());
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let shown = match authority.rsplit_once('@') {
            Some((user_info, host)) => {
                let user = user_info
                    .split_once(':')
                    .map_or(user_info, |(user, _)| user);
                format!("{scheme}://{user}@{host}{tail}")
            }
            None => url.to_owned(),
        };
        Location::Server(shown)
    }

    /// The file, for a file location.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::File(path) => Some(path),
            Location::Server(_) => None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Server(url) => f.write_str(url),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls_are_told_apart() {
        let of = |text: &'static str| Target::of(OsStr::new(text));
        assert_eq!(
            of("/home/a/.hermes/state.db"),
            Target::File(Path::new("/home/a/.hermes/state.db"))
        );
        assert_eq!(of("state.db"), Target::File(Path::new("state.db")));
        assert_eq!(
            of("odd:name//state.db"),
            Target::File(Path::new("odd:name//state.db"))
        );
        assert_eq!(
            of("postgresql://h/db"),
            Target::Postgres("postgresql://h/db")
        );
        assert_eq!(of("POSTGRES://h/db"), Target::Postgres("POSTGRES://h/db"));
        assert_eq!(of("mysql://h/db"), Target::UnknownScheme("mysql://h/db"));
        assert_eq!(of("1x://h"), Target::File(Path::new("1x://h")));
    }

    #[test]
    fn a_server_location_never_shows_the_password() {
        let shown = |url| Location::server(url).to_string();
        assert_eq!(
            shown("postgresql://hermes:s3cret@db.local:5432/state?sslmode=require"),
            "postgresql://hermes@db.local:5432/state?sslmode=require"
        );
        assert_eq!(
            shown("postgresql://db.local/state"),
            "postgresql://db.local/state"
        );
        assert_eq!(
            shown("postgresql://u:p%40ss@h/db"),
            "postgresql://u@h/db",
            "an escaped @ in the password"
        );
        assert_eq!(shown("postgresql://u:a@b@h/db"), "postgresql://u@h/db");
    }
}
