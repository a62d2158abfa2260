//! Shipped rule presets. Only `iterion-default` exists (facts §7.4); its
//! host list is copied verbatim from upstream. Preset rules are evaluated
//! before the block's own rules, so a block can still deny a preset host.

use iterion_core::NetPreset;

/// The `iterion-default` preset: LLM APIs, package registries, forges,
/// Debian and Nix mirrors (facts §7.4).
pub const ITERION_DEFAULT: &[&str] = &[
    // LLM
    "api.anthropic.com",
    "api.openai.com",
    "openrouter.ai",
    "**.bedrock.amazonaws.com",
    "**.googleapis.com",
    "**.openai.azure.com",
    "api.mistral.ai",
    "api.z.ai",
    // npm
    "registry.npmjs.org",
    "**.npmjs.org",
    // PyPI
    "pypi.org",
    "files.pythonhosted.org",
    // Go
    "proxy.golang.org",
    "sum.golang.org",
    // GitHub
    "github.com",
    "**.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    // Other forges
    "gitlab.com",
    "**.gitlab.com",
    "bitbucket.org",
    "**.bitbucket.org",
    // Debian
    "deb.debian.org",
    "security.debian.org",
    // Nix / devbox
    "cache.nixos.org",
    "channels.nixos.org",
    "releases.nixos.org",
    "nix-community.cachix.org",
    "devbox.sh",
    "**.devbox.sh",
    "get.jetify.com",
];

/// The rules of a preset (its name is parsed by [`NetPreset`]).
pub fn rules(preset: NetPreset) -> &'static [&'static str] {
    match preset {
        NetPreset::IterionDefault => ITERION_DEFAULT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_preset_parses_and_has_facts_list() {
        for rule in rules(NetPreset::IterionDefault) {
            assert!(rule.parse::<iterion_core::NetRule>().is_ok(), "{rule}");
        }
        assert_eq!(ITERION_DEFAULT.len(), 31);
    }
}
