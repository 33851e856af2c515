//! What a MySQL session holds only now and then, in one box: every connected client's
//! task holds one word for it, and the box is let go when the session rests with
//! nothing in it.

use super::Relay;

/// What few sessions hold, and only for a while (every session holds a word for it).
#[derive(Default)]
pub(super) struct Rare {
    /// The answer from a shared connection is to Sluice's prepare of the statement
    /// there.
    pub(super) preparing: Option<super::muxed::Preparing>,
    /// A relayed COM_CHANGE_USER's user and database, until the server answers it.
    pub(super) changing_to: Option<(String, String)>,
    /// The id the client's last insert generated (transaction mode: it may have run on
    /// another server connection than the next statement).
    pub(super) last_insert: Option<std::num::NonZeroU64>,
    /// The server's answer to a statement of a new session, kept as it is relayed
    /// (settings.rs).
    pub(super) capture: Option<super::settings::Capture>,
    /// The session's server connection has run only statements of a new session whose
    /// answers were kept (and the session's SETs): the next one's may be kept too.
    pub(super) fresh: bool,
}

impl Relay {
    /// The rare box, made now if there is none.
    pub(super) fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// The id the client's last insert generated, if any.
    pub(super) fn last_insert(&self) -> Option<std::num::NonZeroU64> {
        self.rare.as_ref().and_then(|r| r.last_insert)
    }

    /// An OK said the statement generated `id` (0: none, and the last one stands).
    pub(super) fn note_insert(&mut self, id: u64) {
        if let Some(id) = std::num::NonZeroU64::new(id) {
            self.rare().last_insert = Some(id);
        }
    }

    /// Sluice's prepare on a shared connection whose answer is awaited, taken.
    pub(super) fn take_preparing(&mut self) -> Option<super::muxed::Preparing> {
        self.rare.as_mut().and_then(|r| r.preparing.take())
    }

    /// Lets the box go once it holds nothing (the session rests).
    pub(super) fn settle_rare(&mut self) {
        if self.rare.as_ref().is_some_and(|r| {
            r.preparing.is_none()
                && r.changing_to.is_none()
                && r.last_insert.is_none()
                && r.capture.is_none()
                && !r.fresh
        }) {
            self.rare = None;
        }
    }
}
