// A plot whose points link somewhere (a trend's points, each to its experiment) is put inline,
// so that a point shows its title when pointed at and opens its link when clicked; without
// this script the same plot stays an image. The server's SVG carries no inline style, which
// the pages' Content-Security-Policy would refuse.
document.addEventListener("DOMContentLoaded", function () {
  for (const image of document.querySelectorAll("img[data-inline]")) {
    fetch(image.src)
      .then((answer) => (answer.ok ? answer.text() : Promise.reject(answer.status)))
      .then((text) => {
        const svg = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
        if (svg.nodeName !== "svg") return;
        svg.setAttribute("role", "img");
        svg.setAttribute("aria-label", image.alt);
        svg.classList.add("inline-plot");
        image.replaceWith(document.importNode(svg, true));
      })
      .catch(() => {}); // the image stays as it is
  }
});
