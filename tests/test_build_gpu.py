"""``python -m ggmlgrad build --vulkan/--cuda``: where GPU builds go and the Vulkan header patch
(no compiler run here: the build itself is checked by running it, see README "GPU")."""
from __future__ import annotations

import pytest

from ggmlgrad import fastbuild
from ggmlgrad._ggml.loader import fast_build_dir, gpu_build_dir

# The instance set-up of ggml 0.20.2's ggml-vulkan.cpp, as the sdist has it (abridged around it).
ORIGINAL = """    if (debug_utils_ext) {
        extensions.push_back("VK_EXT_debug_utils");
    }
    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {
        {
            "VK_LAYER_KHRONOS_validation",
            "validate_best_practices",
            vk::LayerSettingTypeEXT::eBool32,
            1,
            &enable_best_practice
        },
    };
    vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);
    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);
#ifdef __APPLE__
"""


def _source(tmp_path, text):
    d = tmp_path / "ggml" / "src" / "ggml-vulkan"
    d.mkdir(parents=True)
    (d / "ggml-vulkan.cpp").write_text(text)
    return tmp_path / "ggml", d / "ggml-vulkan.cpp"


def test_vulkan_patch_guards_the_layer_settings_block_by_header_version(tmp_path):
    src, path = _source(tmp_path, ORIGINAL)
    assert fastbuild.patch_vulkan_source(src) is True
    text = path.read_text()
    guarded = text[text.index("#if VK_HEADER_VERSION >= 261"):text.index("#endif\n")]
    # new headers: the original lines, unchanged, in the #if branch
    assert ORIGINAL[ORIGINAL.index("    VkBool32"):ORIGINAL.index("#ifdef __APPLE__")] in guarded
    # old headers: the instance without the settings structure
    old_branch = guarded[guarded.index("#else"):]
    assert "LayerSetting" not in old_branch.split("\n", 1)[1]
    assert "vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);" \
        in old_branch
    assert text.startswith(ORIGINAL[:ORIGINAL.index("    VkBool32")]) and text.endswith("#endif\n#ifdef __APPLE__\n")
    assert fastbuild.patch_vulkan_source(src) is False    # a rebuild in --build-dir: patched once
    assert path.read_text() == text


def test_vulkan_patch_refuses_an_unknown_source(tmp_path):
    src, _ = _source(tmp_path, "// another ggml version\n")
    with pytest.raises(fastbuild.BuildError, match="VK_EXT_layer_settings block"):
        fastbuild.patch_vulkan_source(src)


def test_gpu_builds_go_beside_the_cpu_fast_build():
    vk = gpu_build_dir(["vulkan"])
    assert vk != fast_build_dir() and vk.parent == fast_build_dir().parent
    assert vk.name.endswith("-vulkan") and gpu_build_dir(["vulkan", "cuda"]).name.endswith("-cuda-vulkan")


def test_build_options_name_the_backends():
    assert fastbuild._GPU_FLAGS == {"-DGGML_CUDA=ON": "cuda", "-DGGML_VULKAN=ON": "vulkan",
                                    "-DGGML_METAL=ON": "metal"}


@pytest.mark.parametrize("argv", [["--cuda-arch", "90"], ["--cuda", "--cuda-arch", "90;rm -rf"],
                                  ["--vulkan", "--cuda-arch", "90"]])
def test_cuda_arch_is_checked_before_anything_builds(argv, capsys):
    with pytest.raises(SystemExit) as e:
        fastbuild.main(argv)
    assert e.value.code == 2
    assert "--cuda-arch" in capsys.readouterr().err


def test_cuda_arch_reaches_cmake(monkeypatch):
    seen = {}
    monkeypatch.setattr(fastbuild, "build", lambda gpu, jobs, **kw: seen.update(gpu=gpu))
    assert fastbuild.main(["--cuda", "--cuda-arch", "86,90"]) == 0
    assert seen["gpu"] == ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=86;90"]


def _toolkit(tmp_path, with_cublas: bool):
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "lib64").mkdir()
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    if with_cublas:
        (tmp_path / "cuda" / "lib64" / "libcublas.so").write_text("")
    return nvcc


def test_cuda_without_cublas_anywhere_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDACXX", str(_toolkit(tmp_path, with_cublas=False)))
    monkeypatch.setattr(fastbuild, "_cublas_wheel", lambda: None)
    with pytest.raises(fastbuild.BuildError, match="pip install nvidia-cublas"):
        fastbuild.cuda_options()


def test_cuda_takes_cublas_from_the_wheel_and_builds_without_vmm_when_no_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDACXX", str(_toolkit(tmp_path, with_cublas=False)))
    lib, inc = tmp_path / "wheel" / "lib", tmp_path / "wheel" / "include"
    lib.mkdir(parents=True)
    inc.mkdir()
    for name in ("libcublas.so.13", "libcublasLt.so.13"):
        (lib / name).write_text("")
    monkeypatch.setattr(fastbuild, "_cublas_wheel", lambda: (lib, inc))
    monkeypatch.setattr(fastbuild, "_has_cuda_driver", lambda: False)
    opts, rpath = fastbuild.cuda_options()
    assert f"-DCUDA_cublas_LIBRARY={lib / 'libcublas.so.13'}" in opts
    assert f"-DCUDA_cublasLt_LIBRARY={lib / 'libcublasLt.so.13'}" in opts
    assert f"-DCMAKE_CUDA_FLAGS=-I{inc}" in opts and "-DGGML_CUDA_NO_VMM=ON" in opts
    assert rpath == [str(lib)]


def test_cuda_with_a_full_toolkit_and_driver_adds_nothing_else(tmp_path, monkeypatch):
    nvcc = _toolkit(tmp_path, with_cublas=True)
    monkeypatch.setenv("CUDACXX", str(nvcc))
    monkeypatch.setattr(fastbuild, "_has_cuda_driver", lambda: True)
    assert fastbuild.cuda_options() == ([f"-DCMAKE_CUDA_COMPILER={nvcc}"], [])

