//! Large values dropped off the caller's path: a request that made a session's whole
//! history (hundreds of thousands of strings) answers before they are freed. One thread,
//! started when first needed, frees what it is sent, in order.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

type Parcel = Box<dyn Send>;

static DROPPER: OnceLock<Option<Mutex<Sender<Parcel>>>> = OnceLock::new();

/// Drops `value` on the dropping thread (here when that thread cannot be started or is
/// gone). A process that exits first leaves it to the exit.
pub fn drop_later<T: Send + 'static>(value: T) {
    let dropper = DROPPER.get_or_init(|| {
        let (tx, rx) = channel::<Parcel>();
        std::thread::Builder::new()
            .name("normafs-drop".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let parcel: Parcel = Box::new(value);
    let refused = match dropper {
        Some(tx) => match tx.lock() {
            Ok(tx) => tx.send(parcel).err().map(|e| e.0),
            Err(_) => Some(parcel),
        },
        None => Some(parcel),
    };
    drop(refused);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    struct Tell(std::sync::mpsc::SyncSender<std::thread::ThreadId>);

    impl Drop for Tell {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    #[test]
    fn a_value_is_dropped_on_another_thread() {
        let (tx, rx) = sync_channel(1);
        drop_later(Tell(tx));
        let on = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the value was dropped");
        assert_ne!(on, std::thread::current().id());
    }
}
