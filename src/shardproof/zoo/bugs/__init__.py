"""Injected bugs: each case states where its first finding must be (see shardproof.zoo)."""
