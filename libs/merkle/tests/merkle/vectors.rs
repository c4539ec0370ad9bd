//! RFC 6962 reference vectors: the Certificate Transparency reference leaves, their tree heads, and
//! (from `$TOOLLEDGER_VECTORS/rfc6962.json`) every inclusion and consistency proof over them, served
//! from tiles and matched byte for byte.

use toolledger_merkle::{
    CompactRange, Hash, TileReader, TileStore, TiledLog, leaf_hash, verify_consistency, verify_inclusion,
};

use crate::common::{hash_from_hex, hex_decode};

/// The CT reference leaves (certificate-transparency `merkle_tree_test.cc`).
const CT_LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

/// The published CT reference roots for the first 0..=8 of those leaves.
const CT_ROOTS: [&str; 9] = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// Appends the leaves one by one, flushing tiles at every size (as a log checkpointing after each
/// entry would), and returns the tile store and the root after each size.
async fn build(leaves: &[Vec<u8>]) -> (TileStore, Vec<Hash>) {
    let tiles = TileStore::in_memory();
    let mut log = TiledLog::new(tiles.clone());
    let mut roots = vec![log.root()];
    for leaf in leaves {
        log.append(leaf_hash(leaf)).await.unwrap();
        log.flush().await.unwrap();
        roots.push(log.root());
    }
    (tiles, roots)
}

#[tokio::test]
async fn embedded_ct_reference_roots() {
    let leaves: Vec<Vec<u8>> = CT_LEAVES.iter().map(|l| hex_decode(l)).collect();
    let (tiles, roots) = build(&leaves).await;
    let reader = TileReader::new(tiles);
    for (size, expected) in CT_ROOTS.iter().enumerate() {
        assert_eq!(roots[size], hash_from_hex(expected), "root of size {size}");
        assert_eq!(
            reader.root(size as u64).await.unwrap(),
            hash_from_hex(expected),
            "tile root {size}"
        );
    }
    // The published audit paths for leaf 0 and leaf 5 of the 8-leaf tree.
    let path0 = reader.inclusion_proof(0, 8).await.unwrap();
    assert_eq!(
        path0.hashes,
        [
            hash_from_hex("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            hash_from_hex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            hash_from_hex("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ]
    );
    let path5 = reader.inclusion_proof(5, 8).await.unwrap();
    assert_eq!(
        path5.hashes,
        [
            hash_from_hex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            hash_from_hex("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            hash_from_hex("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ]
    );
}

fn hashes(value: &serde_json::Value) -> Vec<Hash> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|h| hash_from_hex(h.as_str().unwrap()))
        .collect()
}

fn u64_at(value: &serde_json::Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {value}"))
}

#[tokio::test]
async fn rfc6962_json_vectors_when_available() {
    let Some(dir) = std::env::var_os("TOOLLEDGER_VECTORS") else {
        eprintln!("TOOLLEDGER_VECTORS is unset: only the embedded CT reference roots were checked");
        return;
    };
    let path = std::path::Path::new(&dir).join("rfc6962.json");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .unwrap();

    let leaves: Vec<Vec<u8>> = json["leaves_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| hex_decode(l.as_str().unwrap()))
        .collect();
    for (leaf, expected) in leaves.iter().zip(hashes(&json["leaf_hashes"])) {
        assert_eq!(leaf_hash(leaf), expected);
    }
    let (tiles, roots) = build(&leaves).await;
    let expected_roots = hashes(&json["roots"]);
    assert_eq!(expected_roots.len(), 9);
    assert_eq!(roots, expected_roots);
    // The compact range alone (no tiles) agrees too.
    let mut range = CompactRange::new();
    for (size, leaf) in leaves.iter().enumerate() {
        assert_eq!(range.root(), expected_roots[size]);
        range.append(leaf_hash(leaf));
    }

    let reader = TileReader::new(tiles);
    let inclusion = json["inclusion"].as_array().unwrap();
    assert_eq!(inclusion.len(), 36);
    for case in inclusion {
        let (index, size) = (u64_at(case, "leaf_index"), u64_at(case, "tree_size"));
        let expected = hashes(&case["proof"]);
        let proof = reader.inclusion_proof(index, size).await.unwrap();
        assert_eq!(proof.hashes, expected, "inclusion proof ({index}, {size})");
        let leaf = leaf_hash(&leaves[index as usize]);
        verify_inclusion(&leaf, index, size, &expected, &expected_roots[size as usize]).unwrap();
    }
    let consistency = json["consistency"].as_array().unwrap();
    assert_eq!(consistency.len(), 36);
    for case in consistency {
        let (old, new) = (u64_at(case, "old_size"), u64_at(case, "new_size"));
        let expected = hashes(&case["proof"]);
        let proof = reader.consistency_proof(old, new).await.unwrap();
        assert_eq!(proof.hashes, expected, "consistency proof ({old}, {new})");
        verify_consistency(
            old,
            new,
            &expected,
            &expected_roots[old as usize],
            &expected_roots[new as usize],
        )
        .unwrap();
    }
}
