//! Entry bundles: the entries of each full level-0 tile, kept beside the tiles so that a proof reads
//! its entry with one small object read instead of a ledger read.
//!
//! ```text
//! entries 256·N+1 ..= 256·N+256 (ledger seqs) ─encode─▶ zstd( (u32 BE length ‖ entry bytes) × 256 )
//!                                                        ─▶ bundle/<N> beside tile/0/<N>
//! ```
//!
//! `N` is written as tile indexes are (`x001/234`). Only full bundles exist: the newest entries, fewer
//! than 256, are read from the ledger. Like the tiles, bundles are a cache of the ledger and are never
//! trusted: whoever reads an entry from one hashes it and checks it against a signed root (an
//! inclusion proof) before using it, and reads the ledger when the bundle is missing or disagrees.
//! The encoding is this project's own (zstd, 32-bit lengths), not C2SP's `tile/entries`, whose
//! 16-bit lengths cannot hold every ledger entry.

use std::io::Read;

use bytes::Bytes;

use crate::tile::{TILE_WIDTH, encode_index};
use crate::{Error, Result};

/// Entries in a bundle: one full level-0 tile's worth.
pub const BUNDLE_WIDTH: u64 = TILE_WIDTH;
/// The zstd level bundles are written at: the fastest, about 1.8 µs an entry on the bench's
/// entries, which shrink 7.7 times (level 3 gains 1 % for 7 % more time).
const LEVEL: i32 = 1;
/// The largest entry a bundle may hold: NATS's ceiling on `max_payload`.
pub const MAX_ENTRY: u64 = 64 << 20;
/// The most a reader decompresses from (or reads of) one bundle: bundles are an untrusted cache, and
/// a few kilobytes of zstd can claim gigabytes.
pub const MAX_DECODED: u64 = 256 << 20;

/// The index of the bundle holding ledger `seq` (1-based), and its position in it.
pub fn bundle_of(seq: u64) -> (u64, usize) {
    let leaf = seq - 1;
    (leaf / BUNDLE_WIDTH, (leaf % BUNDLE_WIDTH) as usize)
}

/// The bundle's path relative to the log's prefix, e.g. `bundle/x001/234`.
pub fn bundle_path(index: u64) -> String {
    format!("bundle/{}", encode_index(index))
}

/// Encodes a full bundle's entries.
pub fn encode_bundle<E: AsRef<[u8]>>(entries: &[E]) -> Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(entries.iter().map(|e| e.as_ref().len() + 4).sum());
    for entry in entries {
        let entry = entry.as_ref();
        let len = u32::try_from(entry.len()).map_err(|_| Error::BundleCorrupt {
            path: String::new(),
            reason: format!("an entry of {} bytes does not fit a 32-bit length", entry.len()),
        })?;
        raw.extend_from_slice(&len.to_be_bytes());
        raw.extend_from_slice(entry);
    }
    zstd::bulk::compress(&raw, LEVEL).map_err(|e| Error::BundleCorrupt {
        path: String::new(),
        reason: format!("zstd: {e}"),
    })
}

/// Decodes a bundle read from `path`: exactly [`BUNDLE_WIDTH`] entries, or [`Error::BundleCorrupt`].
pub fn decode_bundle(path: &str, bytes: &[u8]) -> Result<Vec<Bytes>> {
    let mut reader = EntryReader::new(path, bytes)?;
    let mut entries = Vec::with_capacity(BUNDLE_WIDTH as usize);
    while let Some(len) = reader.next_len()? {
        if entries.len() as u64 == BUNDLE_WIDTH {
            return Err(reader.corrupt(format!("more than {BUNDLE_WIDTH} entries")));
        }
        entries.push(reader.read(len)?);
    }
    if entries.len() as u64 != BUNDLE_WIDTH {
        return Err(reader.corrupt(format!("{} entries, expected {BUNDLE_WIDTH}", entries.len())));
    }
    Ok(entries)
}

/// Decodes only entry `at` of a bundle read from `path`, decompressing no further than its end and
/// holding no other entry: what a proof needs. [`Error::BundleCorrupt`] when the bundle ends first,
/// or claims an entry over [`MAX_ENTRY`] or more than [`MAX_DECODED`] bytes up to it.
pub fn decode_bundle_entry(path: &str, bytes: &[u8], at: usize) -> Result<Bytes> {
    let mut reader = EntryReader::new(path, bytes)?;
    for index in 0..at {
        let len = reader
            .next_len()?
            .ok_or_else(|| reader.corrupt(format!("it ends before entry {index}")))?;
        reader.skip(len)?;
    }
    let len = reader
        .next_len()?
        .ok_or_else(|| reader.corrupt(format!("it ends before entry {at}")))?;
    reader.read(len)
}

/// A bundle's entries in order, through a streaming decoder: each length is checked against
/// [`MAX_ENTRY`] and the running total against [`MAX_DECODED`] before any of the entry is read, so
/// a bundle that claims more is refused without being decompressed.
struct EntryReader<'a> {
    path: &'a str,
    decoder: zstd::stream::read::Decoder<'static, std::io::BufReader<&'a [u8]>>,
    /// Entries whose length has been read.
    entries: usize,
    /// Bytes claimed so far, lengths included.
    claimed: u64,
}

impl<'a> EntryReader<'a> {
    fn new(path: &'a str, bytes: &'a [u8]) -> Result<Self> {
        let decoder = zstd::stream::read::Decoder::new(bytes).map_err(|e| Error::BundleCorrupt {
            path: path.to_owned(),
            reason: format!("zstd: {e}"),
        })?;
        Ok(Self {
            path,
            decoder,
            entries: 0,
            claimed: 0,
        })
    }

    fn corrupt(&self, reason: String) -> Error {
        Error::BundleCorrupt {
            path: self.path.to_owned(),
            reason,
        }
    }

    fn zstd(&self, e: &std::io::Error) -> Error {
        self.corrupt(format!("zstd: {e}"))
    }

    /// The next entry's length, within the limits; `None` at the end of the bundle.
    fn next_len(&mut self) -> Result<Option<u64>> {
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < len.len() {
            match self.decoder.read(&mut len[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.zstd(&e)),
            }
        }
        let index = self.entries;
        match got {
            0 => return Ok(None),
            4 => {}
            _ => return Err(self.corrupt(format!("the length of entry {index} is cut short"))),
        }
        let len = u64::from(u32::from_be_bytes(len));
        self.entries += 1;
        self.claimed += 4 + len;
        if len > MAX_ENTRY {
            return Err(self.corrupt(format!("entry {index} claims {len} bytes, over {MAX_ENTRY}")));
        }
        if self.claimed > MAX_DECODED {
            return Err(self.corrupt(format!(
                "its first {} entries claim more than {MAX_DECODED} bytes",
                index + 1
            )));
        }
        Ok(Some(len))
    }

    /// Passes over the entry whose length [`Self::next_len`] gave.
    fn skip(&mut self, len: u64) -> Result<()> {
        let skipped = std::io::copy(&mut (&mut self.decoder).take(len), &mut std::io::sink())
            .map_err(|e| self.zstd(&e))?;
        self.whole(skipped, len)
    }

    /// Reads the entry whose length [`Self::next_len`] gave.
    fn read(&mut self, len: u64) -> Result<Bytes> {
        let mut entry = Vec::with_capacity(len.min(1 << 20) as usize);
        let read = (&mut self.decoder)
            .take(len)
            .read_to_end(&mut entry)
            .map_err(|e| self.zstd(&e))?;
        self.whole(read as u64, len)?;
        Ok(entry.into())
    }

    fn whole(&self, got: u64, len: u64) -> Result<()> {
        if got == len {
            Ok(())
        } else {
            Err(self.corrupt(format!("entry {} is cut short", self.entries - 1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_round_trips_and_a_damaged_one_is_named() {
        let entries: Vec<Vec<u8>> = (0..BUNDLE_WIDTH)
            .map(|i| format!("{{\"entry\":{i}}}").into_bytes())
            .collect();
        let bytes = encode_bundle(&entries).unwrap();
        let decoded = decode_bundle("bundle/000", &bytes).unwrap();
        assert_eq!(decoded.len(), entries.len());
        assert!(
            decoded
                .iter()
                .zip(&entries)
                .all(|(d, e)| d.as_ref() == e.as_slice())
        );
        for at in [0, 17, 255] {
            let entry = decode_bundle_entry("bundle/000", &bytes, at).unwrap();
            assert_eq!(entry.as_ref(), entries[at].as_slice());
        }

        let short = encode_bundle(&entries[..255]).unwrap();
        let error = decode_bundle("bundle/000", &short).unwrap_err().to_string();
        assert!(error.contains("255 entries"), "{error}");
        let error = decode_bundle("bundle/000", &bytes[..bytes.len() / 2])
            .unwrap_err()
            .to_string();
        assert!(error.contains("bundle/000"), "{error}");
        assert!(decode_bundle_entry("bundle/000", &bytes[..bytes.len() / 2], 255).is_err());
        let error = decode_bundle_entry("bundle/000", &short, 255)
            .unwrap_err()
            .to_string();
        assert!(error.contains("ends before entry 255"), "{error}");
    }

    #[test]
    fn a_bundle_that_claims_more_than_the_limits_is_refused_without_decoding_it() {
        // A few bytes of zstd that claim an entry of 4 GiB - 1, then of 64 MiB + 1.
        for len in [u32::MAX, (MAX_ENTRY + 1) as u32] {
            let bomb = zstd::bulk::compress(&len.to_be_bytes(), 1).unwrap();
            let error = decode_bundle_entry("bundle/000", &bomb, 0)
                .unwrap_err()
                .to_string();
            assert!(error.contains(&format!("claims {len} bytes")), "{error}");
            assert!(decode_bundle_entry("bundle/000", &bomb, 1).is_err());
        }
        // Zeros compress to almost nothing: 300 MiB of them is a bomb for a whole-bundle decode.
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            std::io::Write::write_all(&mut encoder, &zeros).unwrap();
        }
        let bomb = encoder.finish().unwrap();
        assert!(bomb.len() < 1 << 20);
        let error = decode_bundle("bundle/000", &bomb).unwrap_err().to_string();
        assert!(error.contains("more than"), "{error}");
    }

    #[test]
    fn seqs_map_to_bundles_and_paths_as_tiles_do() {
        assert_eq!(bundle_of(1), (0, 0));
        assert_eq!(bundle_of(256), (0, 255));
        assert_eq!(bundle_of(257), (1, 0));
        assert_eq!(bundle_path(1_234_067), "bundle/x001/x234/067");
    }
}
