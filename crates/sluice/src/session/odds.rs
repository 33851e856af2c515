//! What a session holds only now and then (a request kept for a retry, the error of a
//! lost transaction, where a rule sends the request, a deferred BEGIN), in one box
//! made when first needed and let go when the session rests: every connected client's
//! task holds one word for all four (see driver::Core).

use crate::error::Error;
use crate::rules::Destination;

/// The box's contents.
#[derive(Default)]
pub struct Held {
    /// The one request in flight, kept while it may be sent again elsewhere: a read
    /// outside a transaction (transaction mode, a route that reads from replicas) of
    /// which no answer byte has reached the client (see driver::arm_retry).
    pub retry: Option<Box<[u8]>>,
    /// The server connection was lost while the client was in a transaction with
    /// nothing in flight: its next request gets this error instead of running (see
    /// session/lost.rs).
    pub lost_tx: Option<Error>,
    /// Where a rule or table rule sends the request being routed (None: the
    /// listener's cluster).
    pub target: Option<Destination>,
    /// A BEGIN answered by Sluice, sent before the transaction's first statement on
    /// the server that statement goes to (session/judge.rs).
    pub deferred: Option<Vec<u8>>,
}

static NONE: Held = Held {
    retry: None,
    lost_tx: None,
    target: None,
    deferred: None,
};

impl Held {
    fn is_empty(&self) -> bool {
        self.retry.is_none()
            && self.lost_tx.is_none()
            && self.target.is_none()
            && self.deferred.is_none()
    }
}

/// Reads as an empty [`Held`] while there is no box; [`Odds::make`] makes it for a
/// write, the `take_` methods and [`Odds::settle`] never do.
#[derive(Default)]
pub struct Odds(Option<Box<Held>>);

impl std::ops::Deref for Odds {
    type Target = Held;
    fn deref(&self) -> &Held {
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl Odds {
    /// The box, made now if there is none.
    pub fn make(&mut self) -> &mut Held {
        self.0.get_or_insert_default()
    }

    pub fn take_retry(&mut self) -> Option<Box<[u8]>> {
        self.0.as_mut().and_then(|h| h.retry.take())
    }

    pub fn take_lost_tx(&mut self) -> Option<Error> {
        self.0.as_mut().and_then(|h| h.lost_tx.take())
    }

    pub fn take_target(&mut self) -> Option<Destination> {
        self.0.as_mut().and_then(|h| h.target.take())
    }

    pub fn take_deferred(&mut self) -> Option<Vec<u8>> {
        self.0.as_mut().and_then(|h| h.deferred.take())
    }

    /// Lets the box go once it holds nothing (the session rests).
    pub fn settle(&mut self) {
        if self.0.as_ref().is_some_and(|h| h.is_empty()) {
            self.0 = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_box_is_made_for_a_write_and_let_go_once_empty() {
        let mut o = Odds::default();
        assert!(o.retry.is_none() && o.take_deferred().is_none());
        assert!(o.0.is_none(), "reading and taking make no box");
        o.make().deferred = Some(b"BEGIN".to_vec());
        o.settle();
        assert!(o.0.is_some(), "kept while it holds something");
        assert_eq!(o.take_deferred().as_deref(), Some(&b"BEGIN"[..]));
        o.settle();
        assert!(o.0.is_none());
        assert_eq!(std::mem::size_of::<Odds>(), 8);
    }
}
