//! A session's queue of what it has in flight: one word in the session while it is
//! empty and let go, the deque boxed once something is queued. Every idle client's
//! task holds its session's queues, and an idle session needs none of them.
//! (Hence the box round a deque, which clippy would not have.)
#![allow(clippy::box_collection)]

use std::collections::VecDeque;

pub struct Queue<T>(Option<Box<VecDeque<T>>>);

/// A queue's box kept in a thread's spares, to be reused box and all.
pub struct Kept<T>(Box<VecDeque<T>>);

/// A thread's spare queues of one kind.
pub type Spares<T> = crate::stream::spare::Spares<Kept<T>>;

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue(None)
    }
}

impl<T> Queue<T> {
    pub const fn new() -> Self {
        Queue(None)
    }

    fn deque(&mut self) -> &mut VecDeque<T> {
        self.0.get_or_insert_with(Box::default)
    }

    pub fn push_back(&mut self, item: T) {
        self.deque().push_back(item);
    }

    pub fn front(&self) -> Option<&T> {
        self.0.as_ref()?.front()
    }

    pub fn front_mut(&mut self) -> Option<&mut T> {
        self.0.as_mut()?.front_mut()
    }

    pub fn pop_front(&mut self) -> Option<T> {
        self.0.as_mut()?.pop_front()
    }

    pub fn pop_back(&mut self) -> Option<T> {
        self.0.as_mut()?.pop_back()
    }

    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        if let Some(q) = &mut self.0 {
            q.clear();
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flat_map(|q| q.iter())
    }

    /// Takes its items, in order (those the iterator does not reach stay queued).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.0.iter_mut().flat_map(|q| q.drain(..))
    }

    /// Lets go of an empty queue's memory (a session at rest keeps none).
    pub fn shed(&mut self) {
        if self.is_empty() {
            self.0 = None;
        }
    }
}

impl<T: 'static> Queue<T> {
    /// [`Queue::shed`], keeping a small queue's memory in the thread's `spares` for the
    /// next session that needs one ([`Queue::unshed`]): a queue filled and emptied
    /// every statement then allocates nothing.
    pub fn shed_to(&mut self, spares: &'static Spares<T>) {
        if self.is_empty()
            && let Some(q) = self.0.take()
            && q.capacity() <= 64
        {
            crate::stream::spare::keep(spares, Kept(q));
        }
    }

    /// A queue without memory takes a spare's, if the thread has one.
    pub fn unshed(&mut self, spares: &'static Spares<T>) {
        if self.0.is_none() {
            self.0 = crate::stream::spare::take(spares).map(|k| k.0);
        }
    }
}

impl<T> IntoIterator for Queue<T> {
    type Item = T;
    type IntoIter = std::collections::vec_deque::IntoIter<T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|q| *q).unwrap_or_default().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::Queue;

    #[test]
    fn an_empty_queue_lets_go_of_its_box() {
        let mut q = Queue::new();
        assert!(q.is_empty() && q.front().is_none() && q.pop_front().is_none());
        q.push_back(1);
        q.push_back(2);
        q.shed();
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(q.pop_front(), Some(1));
        assert_eq!(q.drain().collect::<Vec<_>>(), [2]);
        q.shed();
        assert!(q.0.is_none());
        assert_eq!(std::mem::size_of::<Queue<u64>>(), 8);
    }
}
