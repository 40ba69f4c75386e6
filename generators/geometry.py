"""The conv's geometry: one definition of its output size (stride 1, zero padding), shared by
the executable spec, the float64 reference, the error model, the case builders and the harness.
A definition, not numerics: it depends on nothing, so the spec and the float64 reference can
both use it and still share no arithmetic."""


def conv_extent(n, k, pad):
    """Output positions along one axis: an input of n, a kernel of k, pad zeros each side."""
    return n + 2 * pad - k + 1


def conv_size(H, W, kh, kw, padH, padW):
    """(Hc, Wc): the conv output's rows and columns before pooling."""
    return conv_extent(H, kh, padH), conv_extent(W, kw, padW)
