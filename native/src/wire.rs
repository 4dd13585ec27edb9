//! The bytes in front of an Avro body, and the one-line reasons a record is refused.
//!
//! The texts are those of ``SingleObjectCodec`` and ``RegistryAvroCodec``, so a
//! dead letter reads the same whichever path decoded its batch.

use crate::decode::Error;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// ``C3 01`` + the writer's CRC-64-AVRO fingerprint, little-endian
    SingleObject,
    /// ``00`` + the writer's registry id, big-endian
    Registry,
    /// the body alone, written with the reader's schema
    Bare,
}

pub const MAGIC: [u8; 2] = [0xc3, 0x01];

impl Wire {
    pub fn parse(name: &str) -> Option<Wire> {
        match name {
            "single-object" => Some(Wire::SingleObject),
            "registry" => Some(Wire::Registry),
            "bare" => Some(Wire::Bare),
            _ => None,
        }
    }

    /// The writer's key (fingerprint or id; 0 for bare) and where the body starts.
    pub fn read(self, data: &[u8]) -> Result<(u64, usize), String> {
        match self {
            Wire::Bare => Ok((0, 0)),
            Wire::SingleObject => {
                if data.len() < 2 || data[..2] != MAGIC {
                    return Err(format!(
                        "not Avro single-object encoded (expected marker C3 01, got {})",
                        hex(&data[..data.len().min(2)])
                    ));
                }
                if data.len() < 10 {
                    return Err(format!(
                        "truncated Avro single-object header: {} bytes, the marker and \
                         fingerprint alone take 10",
                        data.len()
                    ));
                }
                let mut fp = [0u8; 8];
                fp.copy_from_slice(&data[2..10]);
                Ok((u64::from_le_bytes(fp), 10))
            }
            Wire::Registry => {
                if data.len() < 5 || data[0] != 0 {
                    return Err(format!(
                        "not in the schema registry wire format (expected byte 00 and a 4-byte \
                         schema id before the Avro body, got {})",
                        hex(&data[..data.len().min(5)])
                    ));
                }
                Ok((
                    u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as u64,
                    5,
                ))
            }
        }
    }

    /// What a record that did not decode says, as the Python codecs say it.
    pub fn reason(self, name: &str, key: u64, len: usize, error: &Error) -> String {
        let whose = match self {
            Wire::Registry => format!("{name} (schema id {key})"),
            _ => name.to_string(),
        };
        match (error, self) {
            (Error::Truncated, Wire::Registry) => format!("cannot decode {whose}: the record is truncated"),
            (Error::Truncated, _) => format!(
                "cannot decode {whose}: the record is truncated ({len} bytes end in the middle of a value)"
            ),
            (Error::Invalid(why), _) => format!("cannot decode {whose}: {why}"),
            (Error::Limit(why), _) => format!("refused before decoding: {why}"),
        }
    }

    pub fn trailing(self, name: &str, key: u64, extra: usize) -> String {
        match self {
            Wire::Registry => {
                format!("{extra} trailing bytes after the {name} record (schema id {key})")
            }
            _ => format!("{extra} trailing bytes after the {name} record"),
        }
    }
}

/// Bytes as Python's ``bytes.hex(" ")`` shows them, or ``empty``.
fn hex(data: &[u8]) -> String {
    if data.is_empty() {
        return "empty".into();
    }
    data.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
