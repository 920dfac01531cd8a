"""Facets of the normalization family's ops: the leading axes through which gpu-compute may cut them into
tiles past the binding limit (LayerNormalization's rows; BatchNormalization's and InstanceNormalization's images
and channels, their per-channel parameters cut with the channels; LRN's images)."""

from __future__ import annotations

from wgsentis.ops.spec import before_axis_attribute, describe, images, images_and_channels, tile_rule

tile_rule("LayerNormalization")(before_axis_attribute(-1))
tile_rule("BatchNormalization", "InstanceNormalization", tiles_channel_params=True)(images_and_channels)
tile_rule("LRN")(images)
describe("BatchNormalization", "InstanceNormalization", channel_rule="per_channel")
