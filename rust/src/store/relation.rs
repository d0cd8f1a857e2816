//! The relations (tables) typed operations name, and the rules every backend
//! keeps for each: its key, and the columns only the store itself writes.
//!
//! A new table is a new variant here (name, key, maintained columns) plus its
//! DDL in each backend; every typed operation then works on it.

use std::fmt;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Relation {
    Sessions,
    Messages,
    GatewayRouting,
    StateMeta,
    CompressionLocks,
    SessionModelUsage,
    TelegramTopicModes,
    TelegramTopicBindings,
    /// Ours: the api_server's stored `/v1/responses` answers (hermes-agent keeps
    /// them in a file of their own; it never reads or writes this table).
    Responses,
}

impl Relation {
    pub const ALL: [Relation; 9] = [
        Relation::Sessions,
        Relation::Messages,
        Relation::GatewayRouting,
        Relation::StateMeta,
        Relation::CompressionLocks,
        Relation::SessionModelUsage,
        Relation::TelegramTopicModes,
        Relation::TelegramTopicBindings,
        Relation::Responses,
    ];

    /// The table's name, the same in every backend.
    pub fn name(self) -> &'static str {
        match self {
            Relation::Sessions => "sessions",
            Relation::Messages => "messages",
            Relation::GatewayRouting => "gateway_routing",
            Relation::StateMeta => "state_meta",
            Relation::CompressionLocks => "compression_locks",
            Relation::SessionModelUsage => "session_model_usage",
            Relation::TelegramTopicModes => "telegram_dm_topic_mode",
            Relation::TelegramTopicBindings => "telegram_dm_topic_bindings",
            Relation::Responses => "hermes_responses",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        Relation::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Relation::ALL.iter().map(|r| r.name()).collect();
                Error::Config(format!(
                    "there is no relation {name:?}; known relations: {}",
                    known.join(", ")
                ))
            })
    }

    /// The columns that identify a row: an insert that finds a row with the
    /// same key conflicts with it.
    pub fn key(self) -> &'static [&'static str] {
        match self {
            Relation::Sessions | Relation::Messages | Relation::Responses => &["id"],
            Relation::GatewayRouting => &["scope", "session_key"],
            Relation::StateMeta => &["key"],
            Relation::CompressionLocks => &["session_id"],
            Relation::SessionModelUsage => &[
                "session_id",
                "model",
                "billing_provider",
                "billing_base_url",
                "billing_mode",
                "task",
            ],
            Relation::TelegramTopicModes => &["chat_id"],
            Relation::TelegramTopicBindings => &["chat_id", "thread_id"],
        }
    }

    /// Columns no caller sets: the store moves them with the rows it writes
    /// (SPEC §3: `message_count` = the session's active rows), or they tie a
    /// row to another (a message's session).
    pub fn maintained(self) -> &'static [&'static str] {
        match self {
            Relation::Sessions => &["message_count", "tool_call_count"],
            Relation::Messages => &["session_id"],
            Relation::GatewayRouting
            | Relation::StateMeta
            | Relation::CompressionLocks
            | Relation::SessionModelUsage
            | Relation::TelegramTopicModes
            | Relation::TelegramTopicBindings
            | Relation::Responses => &[],
        }
    }

    /// Whether rows may be inserted by name. Messages are written only by
    /// `Append`, which moves the session's counters with them.
    pub fn insertable(self) -> bool {
        self != Relation::Messages
    }

    /// Position in [`Relation::ALL`], for tables indexed by relation.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_are_found_by_name_and_unknown_names_list_the_known_ones() {
        for relation in Relation::ALL {
            assert_eq!(Relation::parse(relation.name()).unwrap(), relation);
            assert_eq!(Relation::ALL[relation.index()], relation);
        }
        let err = Relation::parse("session").unwrap_err().to_string();
        assert!(
            err.contains("\"session\"") && err.contains("sessions, messages"),
            "{err}"
        );
    }
}
