//! Single-pass SQL scanning for Sluice: no full parse on the hot path.
//!
//! The session ledger needs to know what a statement does to session state (SET, BEGIN,
//! PREPARE, LISTEN, temp tables, advisory locks, WITH HOLD cursors...) without parsing SQL.
//! [`lex`] splits text into tokens honouring quotes, dollar quotes and comments;
//! [`effects`] walks the statements of a query string and reports the effect of each.

mod effects;
mod lex;

pub use effects::{Effect, effects};
pub use lex::{Token, Tokens};
