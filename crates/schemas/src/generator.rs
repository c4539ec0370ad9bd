//! A seeded generator of realistic sessions, with the truth tests compare against.
