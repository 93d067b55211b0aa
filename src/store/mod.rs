//! TEMPORARY stub of the lead's store API, reverted before merging main.
#![allow(dead_code)]

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the store has stopped")]
    Stopped,
}

#[derive(Clone)]
pub struct Store;

impl Store {
    pub fn memory() -> Store {
        Store
    }
    pub fn is_durable(&self) -> bool {
        false
    }
    pub fn table(&self, _name: &'static str) -> Table {
        Table
    }
}

#[derive(Clone)]
pub struct Table;

impl Table {
    pub fn put(&self, _key: impl Into<Vec<u8>>, _value: impl Into<Vec<u8>>) -> Ticket {
        Ticket
    }
    pub fn delete(&self, _key: impl Into<Vec<u8>>) -> Ticket {
        Ticket
    }
    pub fn load(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        Ok(Vec::new())
    }
}

#[must_use]
pub struct Ticket;

impl Ticket {
    pub async fn durable(self) -> Result<(), StoreError> {
        Ok(())
    }
}
