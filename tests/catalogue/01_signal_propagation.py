"""Lab 1 catalogue: plausible buggy implementations, and a correct one written differently.

BUGS maps a bug's name to {solution cell grade_id: the buggy source of that cell}; each must lose its
exercise's points and nothing else (tests/test_catalogue.py). ALTERNATIVE must keep full marks
(tests/test_autograder.py).
"""

GAIN_OK = '''
def calculate_gain(nonlinearity, param=None):
    table = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv_transpose1d": 1.0,
             "conv_transpose2d": 1.0, "conv_transpose3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0,
             "relu": math.sqrt(2.0), "selu": 0.75}
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1.0 + slope * slope))
    if nonlinearity not in table:
        raise ValueError(nonlinearity)
    return float(table[nonlinearity])
'''

KAIMING_OK = '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.normal_(0.0, std, generator=generator)

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)
'''

XAVIER_OK = '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    with torch.no_grad():
        return tensor.normal_(0.0, std, generator=generator)

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)
'''

STATS_OK = '''
def activation_stats(model, x):
    records, handles = [], []
    def make_hook(name):
        def hook(module, inputs, output):
            records.append((name, output.mean().item(), output.std().item()))
        return hook
    try:
        for name, module in model.named_modules():
            if len(list(module.children())) == 0:
                handles.append(module.register_forward_hook(make_hook(name)))
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return records
'''

GPT_OK = '''
def init_gpt_(model, std=0.02, zero_head=False):
    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                s = std / math.sqrt(2 * model.cfg.n_layer) if name.endswith("c_proj") else std
                m.weight.normal_(0.0, s)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''


def swap(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced by ``new``; ``old`` must occur (so a catalogue edit cannot silently no-op)."""
    assert old in source, f"catalogue: {old!r} not found"
    return source.replace(old, new)


# The "visible-tests-only" answers: plausible code that silenced every visible test of the labs before the
# visible tests covered the whole spec (issue: such a student scored 3/16). Each must now fail a visible test.
VISIBLE_ONLY = {
    "calculate_gain": '''
def calculate_gain(nonlinearity, param=None):
    gains = {"linear": 1.0, "sigmoid": 1.0, "relu": math.sqrt(2.0), "tanh": 5.0 / 3.0, "selu": 0.75}
    return float(gains.get(nonlinearity, 1.0))
''',
    "fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    return tensor.shape[1], tensor.shape[0]
''',
    "kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity))

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor.uniform_(-bound, bound)
''',
    "xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return tensor.normal_(0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return tensor.uniform_(-bound, bound)
''',
    "activation_stats": '''
def activation_stats(model, x):
    records, handles = [], []
    for name, module in model.named_modules():
        if len(list(module.children())) == 0:
            handles.append(module.register_forward_hook(
                lambda m, i, o, name=name: records.append((name, o.mean(), o.std()))))
    model(x)
    for h in handles:
        h.remove()
    return records
''',
    "init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                s = std / math.sqrt(2 * model.cfg.n_layer) if name.endswith("c_proj") else std
                module.weight.normal_(0.0, s)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, std)
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
    return model
''',

    # exercise 7, the first answer from one reading of the spec: He initialisation everywhere, biases 0. Right for plain
    # ReLU nets; a linear net grows by sqrt(2) per layer and every residual block doubles the stream's variance.
    "initialise": '''
def initialise(model, x):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    m.bias.zero_()
''',
}

BUGS = {
    # --- exercise 1: calculate_gain
    "gain_leaky_default_slope_zero": {"calculate_gain": GAIN_OK.replace("0.01 if param is None", "0.0 if param is None")},
    "gain_tanh_is_one": {"calculate_gain": GAIN_OK.replace('"tanh": 5.0 / 3.0', '"tanh": 1.0')},
    "gain_unknown_returns_one": {"calculate_gain": GAIN_OK.replace("raise ValueError(nonlinearity)", "return 1.0")},
    "gain_leaky_missing_sqrt": {"calculate_gain": GAIN_OK.replace("math.sqrt(2.0 / (1.0 + slope * slope))", "2.0 / (1.0 + slope * slope)")},
    "gain_visible_tests_only": {"calculate_gain": VISIBLE_ONLY["calculate_gain"]},
    "gain_linear_returns_int": {"calculate_gain": swap(GAIN_OK, "return float(table[nonlinearity])",
                                                       "return table[nonlinearity] if nonlinearity != 'linear' else 1")},
    "gain_leaky_param_zero_is_default": {"calculate_gain": swap(GAIN_OK, "slope = 0.01 if param is None else param",
                                                                "slope = param or 0.01")},
    # --- exercise 2: fan_in_and_fan_out
    "fans_swapped": {"fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("need 2 dims")
    rf = math.prod(tensor.shape[2:])
    return tensor.shape[0] * rf, tensor.shape[1] * rf
'''},
    "fans_ignore_kernel": {"fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("need 2 dims")
    return tensor.shape[1], tensor.shape[0]
'''},
    "fans_no_check_for_1d": {"fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    shape = list(tensor.shape) + [1]
    rf = math.prod(tensor.shape[2:])
    return shape[1] * rf, shape[0] * rf
'''},
    "fans_visible_tests_only": {"fan_in_and_fan_out": VISIBLE_ONLY["fan_in_and_fan_out"]},
    "fans_float_receptive_field": {"fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("need 2 dims")
    rf = tensor.numel() / (tensor.shape[0] * tensor.shape[1])
    return tensor.shape[1] * rf, tensor.shape[0] * rf
'''},
    "fans_rejects_only_scalars": {"fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    if tensor.dim() == 0:
        raise ValueError("a scalar has no fans")
    fan_out = tensor.shape[0]
    fan_in = tensor.shape[1] if tensor.dim() > 1 else 1
    rf = math.prod(tensor.shape[2:])
    return fan_in * rf, fan_out * rf
'''},
    # --- exercise 3: kaiming
    "kaiming_std_without_gain": {"kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return 1.0 / math.sqrt(fan_in if mode == "fan_in" else fan_out)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    with torch.no_grad():
        return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator=generator)

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    b = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "kaiming_uniform_bound_is_std": {"kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    with torch.no_grad():
        return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator=generator)

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    b = _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "kaiming_ignores_mode": {"kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    with torch.no_grad():
        return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator=generator)

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    b = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "kaiming_not_under_no_grad": {"kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator=generator)

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    b = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor.uniform_(-b, b, generator=generator)
'''},
    "kaiming_ignores_generator": {"kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    with torch.no_grad():
        return tensor.normal_(0.0, _kaiming_std(tensor, a, mode, nonlinearity))

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    b = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.uniform_(-b, b)
'''},
    "kaiming_visible_tests_only": {"kaiming": VISIBLE_ONLY["kaiming"]},
    "kaiming_default_a_sqrt5": {"kaiming": KAIMING_OK.replace('a=0.0, mode="fan_in"', 'a=math.sqrt(5), mode="fan_in"')},
    "kaiming_fans_ignore_kernel": {"kaiming": swap(KAIMING_OK, "fan_in, fan_out = fan_in_and_fan_out(tensor)",
                                                   "fan_in, fan_out = tensor.shape[1], tensor.shape[0]")},
    "kaiming_uniform_skips_mode_check": {"kaiming": swap(KAIMING_OK, '''    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
''', "") + '''
_kaiming_normal_unchecked = kaiming_normal_
def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(mode)
    return _kaiming_normal_unchecked(tensor, a, mode, nonlinearity, generator)
'''},
    "kaiming_generator_reseeds_global_rng": {"kaiming": swap(swap(KAIMING_OK,
        "        return tensor.normal_(0.0, std, generator=generator)",
        "        if generator is not None:\n            torch.manual_seed(generator.initial_seed())\n"
        "        return tensor.normal_(0.0, std)"),
        "        return tensor.uniform_(-bound, bound, generator=generator)",
        "        if generator is not None:\n            torch.manual_seed(generator.initial_seed())\n"
        "        return tensor.uniform_(-bound, bound)")},
    # without a generator it draws from a fixed generator of its own: every call the same numbers, global seed ignored
    "kaiming_no_generator_fixed_numbers": {"kaiming": KAIMING_OK.replace(
        "    with torch.no_grad():\n", "    generator = generator or torch.Generator().manual_seed(0)\n    with torch.no_grad():\n")},
    # --- exercise 4: xavier
    "xavier_fan_in_only": {"xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    with torch.no_grad():
        return tensor.normal_(0.0, gain * math.sqrt(1.0 / fan_in), generator=generator)

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    b = gain * math.sqrt(3.0 / fan_in)
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "xavier_uniform_uses_2_not_6": {"xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    with torch.no_grad():
        return tensor.normal_(0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator=generator)

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    b = gain * math.sqrt(2.0 / (fan_in + fan_out))
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "xavier_gain_ignored": {"xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    with torch.no_grad():
        return tensor.normal_(0.0, math.sqrt(2.0 / (fan_in + fan_out)), generator=generator)

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    b = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        return tensor.uniform_(-b, b, generator=generator)
'''},
    "xavier_returns_new_tensor": {"xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return torch.randn(tensor.shape, generator=generator).to(tensor.device) * std

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    b = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return (torch.rand(tensor.shape, generator=generator).to(tensor.device) * 2 - 1) * b
'''},
    "xavier_visible_tests_only": {"xavier": VISIBLE_ONLY["xavier"]},
    "xavier_fans_ignore_kernel": {"xavier": XAVIER_OK.replace("fan_in, fan_out = fan_in_and_fan_out(tensor)",
                                                              "fan_in, fan_out = tensor.shape[1], tensor.shape[0]")},
    "xavier_uniform_ignores_generator": {"xavier": swap(XAVIER_OK, "tensor.uniform_(-bound, bound, generator=generator)",
                                                        "tensor.uniform_(-bound, bound)")},
    "xavier_uniform_not_under_no_grad": {"xavier": swap(XAVIER_OK, '''    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)''', '''    return tensor.uniform_(-bound, bound, generator=generator)''')},
    "xavier_no_generator_fixed_numbers": {"xavier": XAVIER_OK.replace(
        "    with torch.no_grad():\n", "    generator = generator or torch.Generator().manual_seed(0)\n    with torch.no_grad():\n")},
    # --- exercise 5: activation_stats
    "stats_hooks_never_removed": {"activation_stats": '''
def activation_stats(model, x):
    records = []
    for name, module in model.named_modules():
        if not list(module.children()):
            module.register_forward_hook(lambda m, i, o, name=name: records.append((name, o.mean().item(), o.std().item())))
    with torch.no_grad():
        model(x)
    return records
'''},
    "stats_registration_order": {"activation_stats": '''
def activation_stats(model, x):
    outputs, handles = {}, []
    try:
        for name, module in model.named_modules():
            if not list(module.children()):
                handles.append(module.register_forward_hook(lambda m, i, o, name=name: outputs.__setitem__(name, o)))
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return [(name, o.mean().item(), o.std().item()) for name, o in outputs.items()]
'''},
    "stats_no_finally": {"activation_stats": '''
def activation_stats(model, x):
    records, handles = [], []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, i, o, name=name: records.append((name, o.mean().item(), o.std().item()))))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return records
'''},
    "stats_records_inputs": {"activation_stats": '''
def activation_stats(model, x):
    records, handles = [], []
    try:
        for name, module in model.named_modules():
            if not list(module.children()):
                handles.append(module.register_forward_hook(
                    lambda m, i, o, name=name: records.append((name, i[0].mean().item(), i[0].std().item()))))
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return records
'''},
    "stats_visible_tests_only": {"activation_stats": VISIBLE_ONLY["activation_stats"]},
    "stats_biased_std": {"activation_stats": swap(STATS_OK, "output.std().item()", "output.std(unbiased=False).item()")},
    "stats_tensors_not_floats": {"activation_stats": swap(STATS_OK, "(name, output.mean().item(), output.std().item())",
                                                          "(name, output.mean(), output.std())")},
    "stats_swallows_the_exception": {"activation_stats": swap(STATS_OK, '''        with torch.no_grad():
            model(x)
''', '''        with torch.no_grad():
            try:
                model(x)
            except Exception as exc:
                print("forward pass failed:", exc)
''')},
    "stats_short_names": {"activation_stats": swap(STATS_OK, "handles.append(module.register_forward_hook(make_hook(name)))",
                                                   "handles.append(module.register_forward_hook(make_hook(name.split('.')[-1])))")},
    "stats_builds_a_graph": {"activation_stats": swap(STATS_OK, '''        with torch.no_grad():
            model(x)
''', '''        model(x)
''')},
    # walks named_children() recursively: right for every container, but a model without children records nothing
    "stats_leaf_model_not_recorded": {"activation_stats": '''
def activation_stats(model, x):
    records, handles = [], []
    def make_hook(name):
        def hook(module, inputs, output):
            records.append((name, output.mean().item(), output.std().item()))
        return hook
    def walk(module, prefix):
        for name, child in module.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if next(child.children(), None) is None:
                handles.append(child.register_forward_hook(make_hook(full)))
            else:
                walk(child, full)
    try:
        walk(model, "")
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return records
'''},
    # --- exercise 6: init_gpt
    "gpt_residual_scale_sqrt_L": {"init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                s = std / math.sqrt(model.cfg.n_layer) if name.endswith("c_proj") else std
                m.weight.normal_(0.0, s)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''},
    "gpt_layernorm_untouched": {"init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                s = std / math.sqrt(2 * model.cfg.n_layer) if name.endswith("c_proj") else std
                m.weight.normal_(0.0, s)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''},
    "gpt_zero_head_zeroes_tied_embedding": {"init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                s = std / math.sqrt(2 * model.cfg.n_layer) if name.endswith("c_proj") else std
                m.weight.normal_(0.0, s)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''},
    "gpt_seed_style_rescale_of_all_c_proj_params": {"init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    # The seed's approach: init everything, then multiply output projections by 1/sqrt(2L) ...
    # but it forgets that Linear biases must be zeroed (they keep PyTorch's uniform default).
    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
        for name, p in model.named_parameters():
            if "c_proj" in name:
                p.mul_(1.0 / math.sqrt(2 * model.cfg.n_layer))
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''},
    "gpt_uniform_not_normal": {"init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
    def fill(w, s):
        b = math.sqrt(3.0) * s
        w.uniform_(-b, b)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                fill(m.weight, std / math.sqrt(2 * model.cfg.n_layer) if name.endswith("c_proj") else std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                fill(m.weight, std)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
        if zero_head:
            model.lm_head.weight.zero_()
    return model
'''},
    "gpt_visible_tests_only": {"init_gpt": VISIBLE_ONLY["init_gpt"]},
    "gpt_layernorm_bias_none_crash": {"init_gpt": swap(GPT_OK, '''                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()''', '''                m.weight.fill_(1.0)
                m.bias.zero_()''')},
    "gpt_only_attention_c_proj_scaled": {"init_gpt": swap(GPT_OK, 'name.endswith("c_proj")', 'name.endswith("attn.c_proj")')},
    # new Parameter objects for the LayerNorms: right values, but an optimizer built before holds the old ones
    "gpt_new_layernorm_parameters": {"init_gpt": swap(GPT_OK, '''                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()''', '''                m.weight = nn.Parameter(torch.ones_like(m.weight))
                if m.bias is not None:
                    m.bias = nn.Parameter(torch.zeros_like(m.bias))''')},
    "gpt_new_parameters_untie_head": {"init_gpt": swap(GPT_OK, "                m.weight.normal_(0.0, s)\n",
                                                       "                m.weight = nn.Parameter(torch.randn_like(m.weight) * s)\n")},
    "gpt_tied_zero_head_refused_too_late": {"init_gpt": swap(swap(GPT_OK, '''    if zero_head and model.cfg.tie_weights:
        raise ValueError("tied head")
''', ""), '''        if zero_head:
            model.lm_head.weight.zero_()''', '''        if zero_head and model.cfg.tie_weights:
            raise ValueError("tied head")
        if zero_head:
            model.lm_head.weight.zero_()''')},
    "gpt_position_embedding_skipped": {"init_gpt": swap(GPT_OK, "elif isinstance(m, nn.Embedding):",
                                                        "elif isinstance(m, nn.Embedding) and name.endswith('wte'):")},
    "gpt_zero_head_ignored": {"init_gpt": swap(GPT_OK, '''        if zero_head:
            model.lm_head.weight.zero_()
''', "")},
    # --- exercise 7: initialise (graded on unseen networks)
    "initialise_visible_tests_only": {"initialise": VISIBLE_ONLY["initialise"]},
    # a gain per activation, recognised by name from the visible ones (others: gain 1), and the residual branches
    # scaled: right on every visible network, but an unseen GELU, SiLU, ELU or leaky ReLU plain net fades away
    "initialise_gain_by_visible_name": {"initialise": '''
def initialise(model, x):
    gains = {nn.ReLU: math.sqrt(2.0), nn.Tanh: 5.0 / 3.0, nn.Identity: 1.0}
    blocks = [m for m in model.modules() if isinstance(m, Residual)]
    ends = {b.branch[-1] for b in blocks}
    gain = 1.0
    with torch.no_grad():
        for m in model.modules():
            if type(m) in gains:
                gain = gains[type(m)]
        for m in model.modules():
            if isinstance(m, nn.Linear):
                std = gain / math.sqrt(m.in_features)
                m.weight.normal_(0.0, std / math.sqrt(len(blocks)) if m in ends else std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
'''},
    # Glorot with gain 1 everywhere: a ReLU stack halves its signal's square at every layer
    "initialise_xavier_everywhere": {"initialise": '''
def initialise(model, x):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    m.bias.zero_()
'''},
    # the right gain from torch's table (unknown activations: ReLU's), but no residual scaling
    "initialise_gain_without_residual_scaling": {"initialise": '''
def initialise(model, x):
    names = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Identity: "linear", nn.Sigmoid: "sigmoid", nn.LeakyReLU: "leaky_relu"}
    act = next((m for m in model.modules() if type(m) in names), None)
    slope = act.negative_slope if isinstance(act, nn.LeakyReLU) else None
    gain = nn.init.calculate_gain(names[type(act)], slope) if act is not None else math.sqrt(2.0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, gain / math.sqrt(m.in_features))
                if m.bias is not None:
                    m.bias.zero_()
'''},
    # --- exercise 8: self-check answers
    "answer_q1_seed_value": {"answers": '''
q1_linear_default_std = 0.044
q2_he_relu_invariant = "b"
q3_gpt2_residual_std = 0.02 / math.sqrt(24)
'''},
    "answer_q2_variance": {"answers": '''
q1_linear_default_std = 1 / math.sqrt(3 * 512)
q2_he_relu_invariant = "a"
q3_gpt2_residual_std = 0.02 / math.sqrt(24)
'''},
    "answer_q3_sqrt_L": {"answers": '''
q1_linear_default_std = 1 / math.sqrt(3 * 512)
q2_he_relu_invariant = "b"
q3_gpt2_residual_std = 0.02 / math.sqrt(12)
'''},
}

# Correct, but written differently from the reference: table lookups, torch.randn-based fills under
# no_grad with copy_, a module-type dispatch for the GPT, and float answers typed as numbers.
ALTERNATIVE = {
    "calculate_gain": GAIN_OK,
    "fan_in_and_fan_out": '''
def fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("a weight needs at least 2 dimensions")
    out_ch, in_ch, *kernel = tensor.shape
    k = 1
    for s in kernel:
        k *= s
    return in_ch * k, out_ch * k
''',
    "kaiming": '''
def _kaiming_std(tensor, a, mode, nonlinearity):
    fans = dict(zip(("fan_in", "fan_out"), fan_in_and_fan_out(tensor)))
    if mode not in fans:
        raise ValueError(f"bad mode {mode}")
    return calculate_gain(nonlinearity, a) * fans[mode] ** -0.5

def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype,
                        device=generator.device if generator is not None else tensor.device)
    with torch.no_grad():
        tensor.copy_(noise * std)
    return tensor

def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = (3.0 ** 0.5) * _kaiming_std(tensor, a, mode, nonlinearity)
    u = torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype,
                   device=generator.device if generator is not None else tensor.device)
    with torch.no_grad():
        tensor.copy_((2 * u - 1) * bound)
    return tensor
''',
    "xavier": '''
def xavier_normal_(tensor, gain=1.0, generator=None):
    fi, fo = fan_in_and_fan_out(tensor)
    with torch.no_grad():
        tensor.normal_(mean=0.0, std=gain * (2.0 / (fi + fo)) ** 0.5, generator=generator)
    return tensor

def xavier_uniform_(tensor, gain=1.0, generator=None):
    fi, fo = fan_in_and_fan_out(tensor)
    a = gain * (6.0 / (fi + fo)) ** 0.5
    with torch.no_grad():
        tensor.uniform_(-a, a, generator=generator)
    return tensor
''',
    "activation_stats": '''
def activation_stats(model, x):
    leaves = {m: n for n, m in model.named_modules() if next(m.children(), None) is None}
    records = []
    def hook(module, inputs, output):
        records.append((leaves[module], float(output.mean()), float(output.std())))
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: hook(m, i, o) if m in leaves else None)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return records
''',
    "init_gpt": '''
def init_gpt_(model, std=0.02, zero_head=False):
    if zero_head and model.lm_head.weight is model.transformer.wte.weight:
        raise ValueError("cannot zero a head tied to the embedding")
    L = model.cfg.n_layer
    with torch.no_grad():
        for name, p in model.named_parameters():
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(owner, nn.LayerNorm):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, std * (2 * L) ** -0.5)
            else:
                p.normal_(0.0, std)
        if zero_head:
            model.lm_head.weight.zero_()
    return model
''',
    "initialise": '''
def initialise(model, x):
    # Analytic: each Linear from N(0, g^2 / fan_in), g^2 = 1 / E[phi(z)^2] for z ~ N(0, 1) and phi the activation that
    # feeds it (measured on a Gaussian sample, so any elementwise activation works); every residual branch ends in a
    # zero Linear (SkipInit: each block starts as the identity), LayerNorms at weight 1, bias 0.
    z = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    feeding = None
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                g = 1.0 if feeding is None else float(feeding(z).pow(2).mean().rsqrt())
                m.weight.normal_(0.0, g / m.in_features ** 0.5)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
            elif next(m.children(), None) is None:
                feeding = m
        for m in model.modules():
            if isinstance(m, Residual):
                m.branch[-1].weight.zero_()
''',
    "answers": '''
q1_linear_default_std = 0.0255
q2_he_relu_invariant = "b"
q3_gpt2_residual_std = 0.00408
''',
}
