"""The context pipeline: pure functions over the wire types, and the middleware on them."""
